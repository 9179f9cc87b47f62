/* Checkpoints: save/verify/load round trip is exact; every flipped byte and every truncation is
 * refused; another shape or version is refused with its own message; latest() skips bad files;
 * prune keeps the newest K; a failed save leaves the previous checkpoint intact. */
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/crc32c.h"
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

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) exit(1);
    fclose(f);
    return b;
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
    v2[8] = 2;
    spit(path2, v2, n);
    CHECK(mw_ckpt_verify(path2, NULL) == MW_ERR_FORMAT && strstr(mw_last_error(), "version 2"),
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

    mw_model_destroy(a), mw_model_destroy(b), mw_model_destroy(c3), mw_model_destroy(c3copy);
    mw_model_destroy(other);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_summary("test_checkpoint");
}
