/* Checkpoints: save/verify/load round trip is exact; every flipped byte and every truncation is
 * refused; another shape or version is refused with its own message; latest() skips bad files;
 * prune keeps the newest K; a failed save leaves the previous checkpoint intact. */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
#include "../src/train/checkpoint.h"
#include "check.h"
#include "memwall.h"

static mw_model *tiny(int layers, uint64_t seed) {
    mw_config c;
    mw_config_default(&c);
    c.n_layer = layers, c.n_head = 2, c.n_embd = 16, c.vocab = 37, c.ctx = 8, c.batch = 2, c.seq = 8;
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    mw_model_init_gpt2(m, seed);
    for (int i = 0; i < mw_model_num_tensors(m); i++) { /* give the moments recognisable values */
        mw_param_info t;
        CHECK_OK(mw_model_tensor(m, i, &t));
        for (size_t j = 0; j < t.numel; j++) t.m[j] = (float)(i + j) * 1e-3f, t.v[j] = (float)j * 1e-4f;
    }
    return m;
}

static int same_state(mw_model *a, mw_model *b) {
    for (int i = 0; i < mw_model_num_tensors(a); i++) {
        mw_param_info x, y;
        mw_model_tensor(a, i, &x);
        mw_model_tensor(b, i, &y);
        if (memcmp(x.data, y.data, x.numel * 4) || memcmp(x.m, y.m, x.numel * 4) ||
            memcmp(x.v, y.v, x.numel * 4))
            return 0;
    }
    return 1;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) exit(1);
    fclose(f);
}

int main(void) {
    char dir[] = "/tmp/mw_test_ckpt_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    mw_set_threads(2);

    /* crc32c: hardware and table agree, and the standard check value */
    CHECK(mw_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c check value");
    unsigned char rnd[1000];
    for (int i = 0; i < 1000; i++) rnd[i] = (unsigned char)(i * 131 + 7);
    for (int n = 0; n < 990; n += 37)
        CHECK(mw_crc32c(5, rnd + n % 8, (size_t)(1000 - n - 8)) == mw_crc32c_sw(5, rnd + n % 8, (size_t)(1000 - n - 8)),
              "crc32c hw/sw at %d", n);
    /* combining: the CRC of a record from its pieces' CRCs, for every cut (an empty piece too) */
    for (int cut = 0; cut <= 1000; cut += 53) {
        const uint32_t whole = mw_crc32c(0, rnd, 1000), a = mw_crc32c(0, rnd, (size_t)cut);
        const uint32_t b = mw_crc32c(0, rnd + cut, (size_t)(1000 - cut));
        CHECK(mw_crc32c_combine(a, b, (uint64_t)(1000 - cut)) == whole, "crc32c_combine at cut %d", cut);
    }
    CHECK(mw_crc32c_combine(mw_crc32c(0, rnd, 10), mw_crc32c(0, rnd + 10, 1), 1) == mw_crc32c(0, rnd, 11), "one byte");

    mw_model *a = tiny(2, 1), *b = tiny(2, 2);
    mw_run_state st = {7, 0xABCDEF0123456789ull};
    char path[4096], path2[4096];
    CHECK_OK(mw_ckpt_save(dir, a, &st, 4242, path, sizeof path));
    mw_ckpt_info info;
    CHECK_OK(mw_ckpt_verify(path, &info));
    CHECK(info.state.step == 7 && info.state.loader_rng == 0xABCDEF0123456789ull &&
              info.train_tokens == 4242 && info.cfg.n_layer == 2 && info.cfg.lr == mw_model_config(a)->lr &&
              info.cfg.seed == mw_model_config(a)->seed,
          "run state and config round trip");
    CHECK(!same_state(a, b), "models differ before load");
    CHECK_OK(mw_ckpt_load(path, b, &info));
    CHECK(same_state(a, b), "load restores parameters and both moments bit for bit");

    /* every region of the file: a flipped byte is refused, never loaded */
    size_t n;
    unsigned char *orig = slurp(path, &n);
    snprintf(path2, sizeof path2, "%s/bad.mwck", dir);
    int refused = 0, tried = 0;
    for (size_t i = 0; i < n; i += (i < 200 ? 1 : 97)) {
        unsigned char *c = malloc(n);
        memcpy(c, orig, n);
        c[i] ^= 0x10;
        spit(path2, c, n);
        free(c);
        tried++;
        mw_status s = mw_ckpt_verify(path2, NULL);
        if (s == MW_ERR_FORMAT) refused++;
        else
            fprintf(stderr, "flip at byte %zu of %zu: %s\n", i, n, mw_status_str(s));
    }
    CHECK(refused == tried, "flipped bytes refused: %d of %d", refused, tried);
    /* every truncation */
    refused = tried = 0;
    for (size_t len = 0; len < n; len += (len < 100 ? 1 : 101)) {
        spit(path2, orig, len);
        tried++;
        refused += mw_ckpt_verify(path2, NULL) == MW_ERR_FORMAT;
    }
    CHECK(refused == tried, "truncations refused: %d of %d", refused, tried);
    CHECK(strstr(mw_last_error(), "truncated") != NULL, "truncation message: %s", mw_last_error());
    /* an appended byte */
    unsigned char *longer = malloc(n + 1);
    memcpy(longer, orig, n);
    longer[n] = 0;
    spit(path2, longer, n + 1);
    CHECK(mw_ckpt_verify(path2, NULL) == MW_ERR_FORMAT, "trailing garbage refused");
    free(longer);
    /* another version */
    unsigned char *v2 = malloc(n);
    memcpy(v2, orig, n);
    v2[8] = 3; /* versions 1 (AdamW) and 2 (the other optimizers) are read */
    spit(path2, v2, n);
    CHECK(mw_ckpt_verify(path2, NULL) == MW_ERR_FORMAT && strstr(mw_last_error(), "version 3"),
          "version refused: %s", mw_last_error());
    free(v2);
    /* a load that fails verification does not touch the model */
    mw_model *c3 = tiny(2, 3), *c3copy = tiny(2, 3);
    spit(path2, orig, n / 2);
    CHECK(mw_ckpt_load(path2, c3, NULL) == MW_ERR_FORMAT, "truncated load refused");
    CHECK(same_state(c3, c3copy), "a refused load leaves the model untouched");
    /* a CRC-valid checkpoint whose tensors contradict its own configuration: export refuses it */
    {
        unsigned char *d = malloc(n);
        memcpy(d, orig, n);
        uint32_t mlen;
        memcpy(&mlen, d + 12, 4);
        char *meta = (char *)d + 32, *at = memmem(meta, mlen, "n_layer=2", 9);
        CHECK(at != NULL, "meta has n_layer=2");
        if (at) {
            at[8] = '3';
            uint32_t c1 = mw_crc32c(0, meta, mlen);
            memcpy(d + 16, &c1, 4);
            uint32_t c2 = mw_crc32c(0, d, 24);
            memcpy(d + 24, &c2, 4);
            spit(path2, d, n);
            CHECK(mw_ckpt_verify(path2, NULL) == MW_OK, "the doctored file passes its checksums");
            char outp[4200];
            snprintf(outp, sizeof outp, "%s/doctored.safetensors", dir);
            CHECK(mw_hf_export_ckpt(path2, outp) == MW_ERR_FORMAT && strstr(mw_last_error(), "configuration"),
                  "export of a self-contradicting checkpoint refused: %s", mw_last_error());
            CHECK(access(outp, F_OK) != 0, "nothing written");
        }
        free(d);
    }
    /* another shape */
    mw_model *other = tiny(3, 1);
    CHECK(mw_ckpt_load(path, other, NULL) == MW_ERR_ARG && strstr(mw_last_error(), "another model shape"),
          "shape mismatch refused: %s", mw_last_error());
    free(orig);

    /* latest() skips a corrupt newer file; prune keeps the newest K and removes temporaries */
    mw_run_state s9 = {9, 1}, s11 = {11, 2};
    CHECK_OK(mw_ckpt_save(dir, a, &s9, 4242, NULL, 0));
    CHECK_OK(mw_ckpt_save(dir, a, &s11, 4242, path2, sizeof path2));
    size_t n11;
    unsigned char *b11 = slurp(path2, &n11);
    b11[n11 / 2] ^= 1;
    spit(path2, b11, n11);
    free(b11);
    int skipped;
    char latest[4096];
    CHECK_OK(mw_ckpt_latest(dir, latest, sizeof latest, &info, &skipped));
    CHECK(strstr(latest, "step-00000009.mwck") && skipped == 1 && info.state.step == 9,
          "latest valid is step 9 (got '%s', skipped %d)", latest, skipped);
    char tmpf[4200];
    snprintf(tmpf, sizeof tmpf, "%s/.step-00000012.mwck.tmp.99999", dir);
    spit(tmpf, (const unsigned char *)"partial", 7);
    CHECK_OK(mw_ckpt_latest(dir, latest, sizeof latest, &info, NULL));
    CHECK(strstr(latest, "step-00000009.mwck") != NULL, "a temporary file is never taken");
    CHECK_OK(mw_ckpt_prune(dir, 2, 11));
    struct stat sb;
    snprintf(path2, sizeof path2, "%s/step-00000007.mwck", dir);
    CHECK(stat(path2, &sb) != 0, "prune removed the oldest");
    CHECK(stat(tmpf, &sb) != 0, "prune removed the stale temporary");
    CHECK_OK(mw_ckpt_latest("/tmp/mw_no_such_dir_xyz", latest, sizeof latest, &info, NULL));
    CHECK(latest[0] == 0, "no directory: no checkpoint, no error");
    /* a save that cannot be written leaves nothing behind and reports the path */
    CHECK(mw_ckpt_save("/proc/mw_cannot", a, &s9, 1, NULL, 0) == MW_ERR_IO, "unwritable directory");

    /* a temporary of a live process (the parent) is left alone; one of a dead process goes */
    {
        pid_t child = fork();
        if (child == 0) _exit(0);
        waitpid(child, NULL, 0);
        char live[4200], dead[4200];
        snprintf(live, sizeof live, "%s/.step-00000013.mwck.tmp.%d", dir, (int)getppid());
        snprintf(dead, sizeof dead, "%s/.step-00000014.mwck.tmp.%d", dir, (int)child);
        spit(live, (const unsigned char *)"partial", 7);
        spit(dead, (const unsigned char *)"partial", 7);
        CHECK_OK(mw_ckpt_prune(dir, 2, 11));
        CHECK(stat(live, &sb) == 0, "prune keeps a live process's temporary");
        CHECK(stat(dead, &sb) != 0, "prune removes a dead process's temporary");
        unlink(live);
    }

    /* checkpoint names of any width: step-%08d has 10 digits from step 1e9 */
    {
        char d2[4200], p[4400];
        snprintf(d2, sizeof d2, "%s/wide", dir);
        mw_run_state w1 = {999999999, 1}, w2 = {1000000005, 2}, w3 = {12, 3};
        CHECK_OK(mw_ckpt_save(d2, a, &w3, 4242, NULL, 0));
        CHECK_OK(mw_ckpt_save(d2, a, &w1, 4242, NULL, 0));
        CHECK_OK(mw_ckpt_save(d2, a, &w2, 4242, p, sizeof p));
        CHECK(strstr(p, "/step-1000000005.mwck") != NULL, "10-digit name: %s", p);
        char q[4400];
        snprintf(q, sizeof q, "%s/step-99999999999.mwck", d2); /* beyond int: listed, never taken */
        spit(q, (const unsigned char *)"x", 1);
        mw_ckpt_file *f;
        int nf;
        CHECK_OK(mw_ckpt_list(d2, &f, &nf));
        CHECK(nf == 4 && f[0].step == 1000000005 && f[1].step == 999999999 && f[2].step == 12 && f[3].step == -1,
              "list: %d files, newest first (%lld ...)", nf, nf ? f[0].step : 0);
        free(f);
        CHECK_OK(mw_ckpt_latest(d2, latest, sizeof latest, &info, &skipped));
        CHECK(strcmp(latest, p) == 0 && info.state.step == 1000000005 && skipped == 0,
              "latest is the 10-digit step (got '%s')", latest);
        CHECK_OK(mw_ckpt_prune(d2, 2, 1000000005));
        snprintf(q, sizeof q, "%s/step-00000012.mwck", d2);
        CHECK(stat(q, &sb) != 0 && stat(p, &sb) == 0, "prune counts the 10-digit checkpoints as the newest");
    }

    /* directories: parents created; a file in the way is an error */
    {
        char nest[4200], filep[4200];
        snprintf(nest, sizeof nest, "%s/n1/n2/n3/", dir);
        CHECK_OK(mw_mkdirs(nest));
        CHECK(stat(nest, &sb) == 0 && S_ISDIR(sb.st_mode), "mkdirs creates every level");
        CHECK_OK(mw_mkdirs(nest));
        snprintf(filep, sizeof filep, "%s/n1/n2/n3/f", dir);
        spit(filep, (const unsigned char *)"x", 1);
        snprintf(nest, sizeof nest, "%s/n1/n2/n3/f/g", dir);
        CHECK(mw_mkdirs(nest) == MW_ERR_IO && strstr(mw_last_error(), "not a directory"), "file in the way: %s",
              mw_last_error());
    }

    /* the run lock: a second holder is refused, naming the first one's pid */
    {
        int fd1, fd2, fd3;
        char ld[4200];
        snprintf(ld, sizeof ld, "%s/lockdir", dir);
        CHECK_OK(mw_mkdirs(ld));
        CHECK_OK(mw_dir_lock(ld, 0, &fd1));
        CHECK(fd1 == -1, "no lock file, create 0: nothing taken, nothing created");
        CHECK_OK(mw_dir_lock(ld, 1, &fd1));
        CHECK(fd1 >= 0, "lock taken");
        char want[64];
        snprintf(want, sizeof want, "pid %d", (int)getpid());
        CHECK(mw_dir_lock(ld, 0, &fd2) == MW_ERR_IO && fd2 == -1 && strstr(mw_last_error(), want),
              "second holder refused: %s", mw_last_error());
        CHECK(mw_dir_lock(ld, 1, &fd2) == MW_ERR_IO, "second holder refused (create)");
        close(fd1);
        CHECK_OK(mw_dir_lock(ld, 0, &fd3));
        CHECK(fd3 >= 0, "lock free again after its holder closed it");
        close(fd3);
    }

    /* run keys (save cadence, keep, budget, recompute) round trip; a checkpoint without them
     * (written before they existed) still loads with the defaults */
    {
        mw_config c = *mw_model_config(a);
        c.save_every = 5, c.keep = 2, c.budget = 1ull << 40;
        CHECK_OK(mw_recompute_parse(&c, "every:2"));
        mw_model *r;
        CHECK_OK(mw_model_create(&r, &c));
        mw_model_init_gpt2(r, 4);
        char d3[4200], p3[4400];
        snprintf(d3, sizeof d3, "%s/runkeys", dir);
        mw_run_state s5 = {5, 9};
        CHECK_OK(mw_ckpt_save(d3, r, &s5, 77, p3, sizeof p3));
        CHECK_OK(mw_ckpt_verify(p3, &info));
        CHECK(info.has_run_keys && info.cfg.save_every == 5 && info.cfg.keep == 2 && info.cfg.budget == 1ull << 40 &&
                  info.cfg.recompute == MW_RECOMPUTE_EVERY && info.cfg.recompute_every == 2,
              "run keys round trip");
        size_t n3;
        unsigned char *d = slurp(p3, &n3);
        uint32_t mlen;
        memcpy(&mlen, d + 12, 4);
        char *meta = (char *)d + 32, *at = memmem(meta, mlen, "save_every=", 11);
        CHECK(at != NULL && (size_t)(meta + mlen - at) < 100, "run keys at the end of the meta");
        if (at) { /* cut them: an older writer's file (header, meta crc and trailer length redone) */
            uint32_t cut = (uint32_t)(meta + mlen - at), nm = mlen - cut;
            memmove(at, at + cut, n3 - (size_t)(at + cut - (char *)d));
            size_t nn = n3 - cut;
            memcpy(d + 12, &nm, 4);
            uint32_t c1 = mw_crc32c(0, meta, nm);
            memcpy(d + 16, &c1, 4);
            uint32_t c2 = mw_crc32c(0, d, 24);
            memcpy(d + 24, &c2, 4);
            uint64_t len = nn;
            memcpy(d + nn - 16, &len, 8);
            spit(p3, d, nn);
            CHECK_OK(mw_ckpt_verify(p3, &info));
            CHECK(!info.has_run_keys && info.cfg.save_every == 0 && info.cfg.keep == 3 && info.cfg.budget == 0 &&
                      info.cfg.recompute == MW_RECOMPUTE_NONE && info.state.step == 5,
                  "an older checkpoint loads with the defaults");
            mw_model *r2 = tiny(2, 9);
            CHECK_OK(mw_ckpt_load(p3, r2, NULL));
            CHECK(same_state(r, r2), "and its tensors load");
            mw_model_destroy(r2);
        }
        free(d);
        mw_model_destroy(r);
    }

    mw_model_destroy(a), mw_model_destroy(b), mw_model_destroy(c3), mw_model_destroy(c3copy);
    mw_model_destroy(other);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_summary("test_checkpoint");
}
