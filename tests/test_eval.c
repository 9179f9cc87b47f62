/* Evaluation models (mw_config.inference = MW_INFERENCE_EVAL): the loss of a training model's
 * forward, bit for bit, from logits of 256 positions at a time; their plan holds no (B,T,V)
 * logits and no KV cache, so eval of GPT-2 at B=8, T=1024 no longer plans 1.6 GB of logits. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "memwall.h"

static mw_model *make(const mw_config *base, int inference, const mw_model *from) {
    mw_config c = *base;
    c.inference = inference;
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    for (int i = 0; from && i < mw_model_num_tensors(m); i++) {
        mw_param_info p, q;
        CHECK_OK(mw_model_tensor(from, i, &p));
        CHECK_OK(mw_model_tensor(m, i, &q));
        memcpy(q.data, p.data, p.numel * sizeof(float));
    }
    return m;
}

static void test_same_loss(void) {
    mw_config c;
    mw_config_default(&c); /* N = 300 positions: two chunks of the loss, the second short */
    c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.vocab = 97, c.ctx = 128, c.batch = 3, c.seq = 100;
    mw_model *train = make(&c, 0, NULL);
    mw_model_init_gpt2(train, 5);
    for (int i = 0; i < mw_model_num_tensors(train); i++) { /* non-trivial LayerNorms and biases */
        mw_param_info p;
        CHECK_OK(mw_model_tensor(train, i, &p));
        if (p.ndim == 1)
            for (size_t j = 0; j < p.numel; j++) p.data[j] += 0.05f * (float)((j * 7919 + i) % 13) - 0.3f;
    }
    mw_model *eval = make(&c, MW_INFERENCE_EVAL, train), *inf = make(&c, 1, train);
    int32_t in[300], tg[300];
    uint64_t r = 77;
    for (int i = 0; i < 300; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int32_t)((r >> 33) % 97);
        tg[i] = (int32_t)((r >> 17) % 97);
    }
    float lt, le, li;
    CHECK_OK(mw_model_forward(train, in, tg, &lt));
    CHECK_OK(mw_model_forward(eval, in, tg, &le));
    CHECK_OK(mw_model_forward(inf, in, tg, &li));
    CHECK(memcmp(&lt, &le, sizeof lt) == 0 && memcmp(&li, &le, sizeof lt) == 0,
          "loss: training model %.9g, evaluation %.9g, inference (all logits) %.9g", lt, le, li);
    printf("loss over 300 positions: training %.9g, evaluation %.9g, inference %.9g\n", lt, le, li);

    /* mw_evaluate, as `memwall eval` calls it: the same loss as the inference model gave */
    char dir[] = "/tmp/mw_test_eval_XXXXXX", path[600];
    if (!mkdtemp(dir)) exit(1);
    snprintf(path, sizeof path, "%s/val.bin", dir);
    int32_t toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (i * 31 + i / 7) % 97;
    CHECK_OK(mw_data_write(path, toks, 1000, 97, 2, &(mw_tokenizer_id){"bpe", 1}));
    mw_data *d;
    CHECK_OK(mw_data_open(&d, path));
    float ve, vi;
    CHECK_OK(mw_evaluate(eval, d, 100, &ve));
    CHECK_OK(mw_evaluate(inf, d, 100, &vi));
    CHECK(memcmp(&ve, &vi, sizeof ve) == 0, "mw_evaluate: evaluation model %.9g, inference model %.9g", ve, vi);
    mw_data_close(d);
    unlink(path);
    rmdir(dir);

    CHECK(mw_model_logits(eval) == NULL && mw_model_decode(eval, 0, 0) == NULL,
          "an evaluation model has no logits and no KV cache");
    float unused;
    CHECK(mw_model_forward(eval, in, NULL, &unused) == MW_ERR_ARG, "an evaluation model needs targets");
    CHECK(mw_model_logits(inf) != NULL && mw_model_decode(inf, 0, 0) != NULL, "an inference model keeps both");
    CHECK(strcmp(mw_model_plan(eval)->policy, "eval") == 0, "plan says eval: %s", mw_model_plan(eval)->policy);
    mw_model_destroy(train);
    mw_model_destroy(eval);
    mw_model_destroy(inf);
}

/* The reference mean loss of the first n+1 tokens of toks: each (T+1)-token window alone on a
 * B=1 model, the last (shorter) one on a B=1 model of its length; the same weights as from. */
static double ref_loss(const mw_config *base, const mw_model *from, const int32_t *toks, int n) {
    double sum = 0.0;
    for (int at = 0; at < n;) {
        const int len = n - at < base->seq ? n - at : base->seq;
        mw_config c = *base;
        c.batch = 1, c.seq = len;
        mw_model *m = make(&c, MW_INFERENCE_EVAL, from);
        float l;
        CHECK_OK(mw_model_forward(m, toks + at, toks + at + 1, &l));
        sum += (double)l * len;
        mw_model_destroy(m);
        at += len;
    }
    return sum / n;
}

/* mw_evaluate scores every target of a file: the whole batches, then one more batch of the
 * windows left, the last one shorter (issue 30: it dropped them, 14,336 of 15,153 tokens); for
 * both families, on evaluation and training models alike. */
static void test_every_token(void) {
    for (int arch = 0; arch < 2; arch++) {
        mw_config c;
        mw_config_default(&c);
        if (arch) CHECK_OK(mw_config_preset(&c, "llama-tiny"));
        c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.vocab = 97, c.ctx = 128, c.batch = 3, c.seq = 100;
        if (arch) c.n_kv_head = 1, c.ffn = 64;
        mw_model *train = make(&c, 0, NULL);
        mw_model_init(train, 11);
        mw_model *eval = make(&c, MW_INFERENCE_EVAL, train);
        char dir[] = "/tmp/mw_test_eval_XXXXXX", path[600];
        if (!mkdtemp(dir)) exit(1);
        snprintf(path, sizeof path, "%s/val.bin", dir);
        static int32_t toks[1150];
        for (int i = 0; i < 1150; i++) toks[i] = (i * 37 + i / 5 + (i * i) % 11) % 97;
        /* 1150 tokens: 1149 targets, 3 whole batches of 3x100 (900), then 2 windows and one of 49;
         * 150 tokens: less than a batch, a window and one of 49 */
        const int counts[2] = {1150, 150};
        for (int k = 0; k < 2; k++) {
            const int n = counts[k];
            CHECK_OK(mw_data_write(path, toks, (uint64_t)n, 97, 2, &(mw_tokenizer_id){"bpe", 1}));
            mw_data *d;
            CHECK_OK(mw_data_open(&d, path));
            float le, lt, lo;
            uint64_t te = 0, tt = 0;
            CHECK_OK(mw_evaluate_tokens(eval, d, 1 << 30, &le, &te));
            CHECK_OK(mw_evaluate_tokens(train, d, 1 << 30, &lt, &tt));
            CHECK_OK(mw_evaluate(eval, d, 1 << 30, &lo));
            const double ref = ref_loss(&c, train, toks, n - 1);
            CHECK(te == (uint64_t)n - 1 && tt == te, "%s, %d tokens: %llu and %llu targets scored, not %d", arch ? "llama" : "gpt2",
                  n, (unsigned long long)te, (unsigned long long)tt, n - 1);
            CHECK(fabs(le - ref) <= 2e-6 * ref, "%s, %d tokens: loss %.9g, every window alone %.9g", arch ? "llama" : "gpt2", n,
                  le, ref);
            CHECK(memcmp(&le, &lt, sizeof le) == 0 && memcmp(&le, &lo, sizeof le) == 0,
                  "evaluation model %.9g, training model %.9g, mw_evaluate %.9g", le, lt, lo);
            printf("%s, %d tokens: %llu targets scored, loss %.9g, each window alone %.9g\n", arch ? "llama" : "gpt2", n,
                   (unsigned long long)te, le, ref);
            if (n == 1150) { /* n_batches within the whole batches: those alone, as before */
                float l2, l3;
                uint64_t t2, t3;
                CHECK_OK(mw_evaluate_tokens(eval, d, 2, &l2, &t2));
                CHECK_OK(mw_evaluate_tokens(eval, d, 3, &l3, &t3));
                const double r3 = ref_loss(&c, train, toks, 900);
                CHECK(t2 == 600 && t3 == 900 && fabs(l3 - r3) <= 2e-6 * r3, "2 batches: %llu targets; 3: %llu, loss %.9g (%.9g)",
                      (unsigned long long)t2, (unsigned long long)t3, l3, r3);
            }
            mw_data_close(d);
        }
        float l;
        mw_data *d;
        CHECK_OK(mw_data_write(path, toks, 1, 97, 2, &(mw_tokenizer_id){"bpe", 1}));
        CHECK_OK(mw_data_open(&d, path));
        CHECK(mw_evaluate(eval, d, 1, &l) == MW_ERR_ARG, "one token: nothing to score, refused");
        mw_data_close(d);
        unlink(path);
        rmdir(dir);
        mw_model_destroy(train);
        mw_model_destroy(eval);
    }
}

/* GPT-2 at B=8, T=1024: no buffer of B*T*V floats; the logits buffer holds 256 positions. */
static void test_gpt2_plan(void) {
    mw_config c;
    mw_config_default(&c);
    CHECK_OK(mw_config_preset(&c, "gpt2"));
    c.batch = 8, c.seq = 1024;
    const uint64_t BTV = 8ull * 1024 * 50257 * 4, chunk = 256ull * 50257 * 4;
    mw_plan_summary se, si;
    c.inference = 1;
    CHECK_OK(mw_plan(&c, &si));
    c.inference = MW_INFERENCE_EVAL;
    CHECK_OK(mw_plan(&c, &se));
    mw_plan_buffer *b;
    int n, logits = 0;
    CHECK_OK(mw_plan_buffers(&c, &b, &n));
    for (int i = 0; i < n; i++) {
        CHECK(b[i].bytes < BTV, "eval plans %s of %llu bytes (B*T*V floats: %llu)", b[i].name,
              (unsigned long long)b[i].bytes, (unsigned long long)BTV);
        CHECK(strstr(b[i].name, "cache") == NULL, "eval plans a KV cache: %s", b[i].name);
        if (strcmp(b[i].name, "logits") == 0) {
            logits++;
            CHECK(b[i].bytes == (chunk + 63) / 64 * 64 && b[i].category == MW_CAT_WORK,
                  "logits: %llu bytes", (unsigned long long)b[i].bytes);
        }
    }
    free(b);
    CHECK(logits == 1, "one logits buffer (%d)", logits);
    CHECK(si.category[MW_CAT_ACTS] >= BTV && se.category[MW_CAT_ACTS] < BTV / 4 && se.peak + BTV / 2 < si.peak,
          "eval activations %llu, peak %llu; inference activations %llu, peak %llu",
          (unsigned long long)se.category[MW_CAT_ACTS], (unsigned long long)se.peak,
          (unsigned long long)si.category[MW_CAT_ACTS], (unsigned long long)si.peak);
    printf("GPT-2 B=8 T=1024: eval plan %.2f GiB (activations %.2f GiB), with all logits %.2f GiB\n",
           se.peak / 1073741824.0, se.category[MW_CAT_ACTS] / 1073741824.0, si.peak / 1073741824.0);
}

int main(void) {
    mw_set_threads(2);
    test_same_loss();
    test_every_token();
    test_gpt2_plan();
    return test_summary("test_eval");
}
